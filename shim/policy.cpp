// Placeholder translation unit; replaced by the policy implementation.
