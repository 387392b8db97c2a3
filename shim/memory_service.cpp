// Placeholder translation unit; replaced by the memory-service implementation.
