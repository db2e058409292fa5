"""The run log: the one contract between the system under test (trainer/) and the harness (chaos/).

Standard library only; imports neither side. docs/events.md documents it.
"""
