"""Loading a decoder: a checkpoint path → its family's parameters on a device mesh (`loader`), the
one part of engine/model that looks families up in their registry."""
