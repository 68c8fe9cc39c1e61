"""Docker: the client, images, containers, exec and files, and cleanup."""
