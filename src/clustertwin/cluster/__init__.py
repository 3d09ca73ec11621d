"""The cluster as a whole: collectives as nccl-tests measures them (``collective``), and several jobs
placed on one cluster, sharing its links (``placement``). An outer part: it uses the core (specs,
parallel, cost, schedule) and the commands use it."""
