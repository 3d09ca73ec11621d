"""Power, energy and heat: what a training step draws, per-stage clock plans that cut its energy
(Perseus), and the thermal stragglers of a node (Lit Silicon). Sits on the core (cost/power.py holds the
DVFS model the pricer uses); imports nothing outer."""
