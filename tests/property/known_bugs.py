"""Known wrong answers (issue 31) the random programs leave out until they are fixed.

Each name switches a part of the grammar off; test_prop_issue31.py holds a strict-xfail
property test per name that draws exactly that part. When a fix lands, its test XPASSes
(CI fails): delete the xfail mark there and the name here, so the general grammar
covers it again.
"""
# Empty: the four bugs it held (bool_sum, grad_permute, split_extreme_grad_lowp,
# lse_empty_rows) are fixed, and their property tests in test_prop_issue31.py now pass.
EXCLUDED: set[str] = set()
