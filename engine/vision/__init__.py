"""Images for vision-language models, prepared on the host: bytes in, the vision encoder's input out."""
