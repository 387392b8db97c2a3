// Placeholder translation unit; replaced by the runtime sources.
