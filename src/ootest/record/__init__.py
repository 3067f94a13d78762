"""The run record, shared by the plugin (which writes it) and the runner (which reads it).

It imports neither: the JSONL results file and the outcome names
(:mod:`.results`), in-flight and crash files (:mod:`.crash`), shard assignment
(:mod:`.shard`) and the identity rules — file keys, variant IDs' file part and
node IDs pytest accepts back (:mod:`.identity`). Nothing here imports torch.
"""
