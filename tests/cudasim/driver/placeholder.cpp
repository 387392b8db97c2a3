// Placeholder translation unit; replaced by the driver sources.
