"""What a scenario is: the schema (scenario, expect, limits, ft options, fault kinds) and the fault plan."""
