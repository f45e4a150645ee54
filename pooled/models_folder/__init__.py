"""The models folder: the catalog, downloads, what is on disk, and the model ids it serves under."""
