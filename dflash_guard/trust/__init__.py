"""Trust: the policy (tiers, waivers, reviewed code), signatures, and the signed approval record."""
