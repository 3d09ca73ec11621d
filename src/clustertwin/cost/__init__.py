"""Pricing of ops: compute on a hardware profile, communication on the topology."""
