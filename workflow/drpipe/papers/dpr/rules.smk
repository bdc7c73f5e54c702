# DPR's rules: Table 3 and Figure 1 (helpers in common.smk beside this file).
