"""Models: families, layers, native kernels, checkpoint reading, quantized formats, sharding rules and
the forward function."""
