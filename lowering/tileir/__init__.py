"""Stages 3-4: tile programs, and the thread programs a layout makes of them."""
