"""Compose priced ops into one iteration: pipeline schedule, overlap, optimizer; and memory."""
