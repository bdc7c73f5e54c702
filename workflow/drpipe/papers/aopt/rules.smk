# AOpt's rules: rounds, grid, and its Table 3 and Figures 6 and 7 (helpers, paths and the
# config checks in common.smk beside this file).
