#| source: https://github.com/deepspeedai/DeepSpeed/blob/a0186adf5de980486759a4aa429e10f28b6f79aa/docs/_tutorials/getting-started.md
#| repository: deepspeedai/DeepSpeed, path: docs/_tutorials/getting-started.md, commit: a0186adf5de980486759a4aa429e10f28b6f79aa
#| part: the command of "Resource Configuration (multi-node)" that launches across the nodes of myhostfile
#| sha256: 43ead6d9118d9b7109ccf97814ff7c8f18ce6ce9bec835da60794a4abea45156
#| below this header: the text as published, unedited
deepspeed --hostfile=myhostfile <client_entry.py> <client args> \
  --deepspeed --deepspeed_config ds_config.json
