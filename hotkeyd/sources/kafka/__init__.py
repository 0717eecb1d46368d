"""The Kafka consumer-group source and its dead-letter forwarding."""

from hotkeyd.sources.kafka.source import KafkaSource

__all__ = ["KafkaSource"]
