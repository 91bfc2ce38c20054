"""Tests of savers over several databases: routing, fan-out, failures, rebalance."""
