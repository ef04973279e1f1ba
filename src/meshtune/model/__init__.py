"""What is trained: the model spec (:mod:`~meshtune.model.spec`), its Hugging Face import
(:mod:`~meshtune.model.hf` and its families and extras), the FC layers of a block
(:mod:`~meshtune.model.layers`) and the MoE / MLA arithmetic (:mod:`~meshtune.model.moe`)."""
