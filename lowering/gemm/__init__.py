"""The tensor-core contraction path: plan and tiles, sm_80 and sm_90a emitters."""
