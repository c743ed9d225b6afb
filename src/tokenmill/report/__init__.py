"""Tables and figures. Turns computed values into things people read; computes nothing itself."""
