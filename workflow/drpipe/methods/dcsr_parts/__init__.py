"""The parts of DCSR (``drpipe.methods.dcsr``) that are not the method class itself.

- ``markers``: the ``<sent>`` marker input, reading sentence vectors at the markers (or over
  their spans), and encoding a corpus block into sentence vectors
- ``scoring``: Score Normalization, sentence units to ranked passages (retrieval, mining,
  validation)
- ``training_data``: training passages cut as the corpus cuts them, their answer sentences,
  and the training batch

A package, not a module: the method registry (``drpipe.methods.method_names``) takes only the
modules of ``drpipe/methods`` for methods. ``dcsr`` imports these modules at its top, so the
code hash of a DCSR job (the method's module and its static imports) covers them.
"""
