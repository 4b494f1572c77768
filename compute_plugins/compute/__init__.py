"""Compute side: the agent (the periodic, the published host states, the
decisions addressed to the host), claims and the ledger, guest XML."""
