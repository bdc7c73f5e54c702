# xMoCo's rules: its Table 2, Table 3 and Figure 2 (helpers in common.smk beside this file).
