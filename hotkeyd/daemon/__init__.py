"""The running daemon: settings, source wiring, the service loop, HTTP and metrics."""
