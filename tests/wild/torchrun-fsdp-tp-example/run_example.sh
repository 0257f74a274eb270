#| source: https://github.com/pytorch/examples/blob/c4dc481e686b5cc7d1aad9e3977b91d8ba83bddd/distributed/tensor_parallelism/run_example.sh
#| repository: pytorch/examples, path: distributed/tensor_parallelism/run_example.sh, commit: c4dc481e686b5cc7d1aad9e3977b91d8ba83bddd
#| sha256: ed74161aa75a8c31eafa4ab79fff16967396479bfe3e28b49299e753fb98d9dd
#| below this header: the text as published, unedited

# To run samples:
# bash run_example.sh {file_to_run.py} {num_gpus}
# where file_to_run = example to launch.  Default = 'fsdp_tp_example.py'
# num_gpus = num local gpus to use (must be at least 2). Default = 4

# samples to run include:
# sequence_parallel_example.py
# tensor_parallel_example.py
# fsdp_tp_example.py

echo "Launching ${1:-fsdp_tp_example.py} with ${2:-4} gpus"
torchrun --nnodes=1 --nproc_per_node=${2:-4} --rdzv_id=101 --rdzv_endpoint="localhost:5972" ${1:-fsdp_tp_example.py}
