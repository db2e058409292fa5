"""What runs inside the ranks: the fault injector component and the faults it fires (loss, slow rank, storage)."""
