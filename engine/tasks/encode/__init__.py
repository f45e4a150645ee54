"""The encode task: embedding and rerank models (an encoder family's, or a decoder's embedding pass)
beside or as the model, their batches on the engine thread."""
