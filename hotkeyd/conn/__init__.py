"""Connections shared by the daemon and the client SDK: Redis and Kafka URLs, redaction."""
