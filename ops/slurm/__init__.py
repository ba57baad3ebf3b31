"""trainmedic under Slurm (docs/slurm.md): a job healed inside its allocation (`trainmedic slurm run` in
the batch script, `trainmedic node` on each allocated node as a step of its own), and the nodes the
healer isolates drained in Slurm with its reason (`trainmedic slurm drains`)."""
