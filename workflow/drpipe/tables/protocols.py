"""The protocol of a table row: what its method may have read of the evaluated questions."""

# The usual rows never see a test answer; AOpt's leak-free rows learn from training answers
# only; an oracle row's method read the test answers (an upper bound, in a block of its own).
STANDARD = "standard"
LEAKFREE = "leak-free"
ORACLE = "uses the test answers (oracle)"
PROTOCOL_ORDER = (STANDARD, LEAKFREE, ORACLE)
