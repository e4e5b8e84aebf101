"""Running one tool call (arguments, timeout, retries, result) and the tools a thread registered."""
