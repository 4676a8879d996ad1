"""Private test infrastructure: throwaway servers and shared fixtures."""
