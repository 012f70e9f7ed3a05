"""The supervised loops, one service per module, and what supervises them."""
