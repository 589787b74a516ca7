"""The pass pipeline from algorithm graphs down to PTX."""
