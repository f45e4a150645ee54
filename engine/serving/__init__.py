"""Serving: the engine thread's scheduling — intake, admission, rows and lanes, KV pages and the prefix
cache's disk tier, prompt-lookup drafts."""
