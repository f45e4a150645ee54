"""RMSNorm, in float32 whatever the activation dtype."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.layers.linear import logical_param

Array = jax.Array


class RMSNorm(nn.Module):
    size: int
    eps: float
    axis_name: str
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        scale = logical_param(self, "scale", (self.size,), (self.axis_name,), self.dtype, nn.initializers.ones)
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return scale * normed.astype(self.dtype)
