# SPDX-License-Identifier: Apache-2.0
# The training program's refusals (ctest example.05_train.<CASE>, examples/CMakeLists.txt): each
# case runs the program (a tiny model, a few steps, about a second each) on files made in WORK and
# checks its exit status, its message and that no input or older output was touched.
#   cmake -DPROGRAM=<05_train> -DWORK=<empty folder> -DDATA=<a text file> -DCASE=<case> [-DV1_CHECKPOINT=<file>]
#         [-DMEMORY_LIMIT=ON] -P train_program_test.cmake
# Cases: aliases (outputs that are inputs or each other), foreign (existing files that are not the
# program's, special files), unwritable (outputs that cannot be saved), resume_config (another
# run's checkpoint, a single file or a folder of shards), diverged (a non-finite loss), messages
# (sizes too large, numbers past their limits, read errors), interchange (--export and
# --dump-batches of several ranks and micro-batches), lora (--lora from an exported base, healed).
cmake_minimum_required(VERSION 3.20)
foreach(v PROGRAM WORK DATA CASE)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "train_program_test.cmake: -D${v}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(tiny --layers 1 --d-model 128 --heads 2 --kv-heads 1 --ffn 256 --seq 64 --batch 2 --recipe mxfp4 --warmup 1
         --log-every 1 --eval-every 0)
# 20 kB of the corpus, the run's --data.
file(READ ${DATA} text LIMIT 20000)
file(WRITE ${WORK}/data.txt "${text}")

# Runs the program in WORK with the tiny model and ARGN; sets rc and out (stdout and stderr) in
# the caller.
function(train)
  execute_process(COMMAND ${PROGRAM} ${tiny} ${ARGN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE r OUTPUT_VARIABLE o ERROR_VARIABLE o)
  set(rc ${r} PARENT_SCOPE)
  set(out "${o}" PARENT_SCOPE)
endfunction()

# Fails the test unless the last run exited with `code` and its output matches every regex.
function(expect what code)
  set(bad "")
  if(NOT rc STREQUAL code)
    set(bad "exit status ${rc}, expected ${code}")
  endif()
  foreach(re IN LISTS ARGN)
    if(NOT out MATCHES "${re}")
      string(APPEND bad "; no match for '${re}'")
    endif()
  endforeach()
  if(bad)
    message(FATAL_ERROR "${CASE}: ${what}: ${bad}\n--- output:\n${out}")
  endif()
endfunction()

# Refused before the first step: no progress line.
function(expect_no_step what)
  if(out MATCHES "step +1/")
    message(FATAL_ERROR "${CASE}: ${what}: the run trained before it was refused\n--- output:\n${out}")
  endif()
endfunction()

function(expect_unchanged what file hash)
  file(SHA256 ${WORK}/${file} now)
  if(NOT now STREQUAL hash)
    message(FATAL_ERROR "${CASE}: ${what}: ${file} was changed")
  endif()
endfunction()

# Fails unless WORK/<name> is still a named pipe (test -p).
function(expect_fifo what name)
  execute_process(COMMAND test -p ${WORK}/${name} RESULT_VARIABLE not_fifo)
  if(NOT not_fifo EQUAL 0)
    message(FATAL_ERROR "${CASE}: ${what}: ${name} is no longer a named pipe")
  endif()
endfunction()

# Sets `var` in the caller to the hex bytes of WORK/<file> from `offset` on.
function(read_hex var file offset)
  file(READ ${WORK}/${file} hex OFFSET ${offset} HEX)
  set(${var} "${hex}" PARENT_SCOPE)
endfunction()

file(SHA256 ${WORK}/data.txt data_hash)

if(CASE STREQUAL "aliases")
  # An output that is the data, by any spelling or link, and two outputs that are one file.
  file(CREATE_LINK ${WORK}/data.txt ${WORK}/hard.txt)
  file(CREATE_LINK ${WORK}/data.txt ${WORK}/soft.txt SYMBOLIC)
  foreach(args IN ITEMS "--csv;./data.txt" "--checkpoint;data.txt" "--csv;hard.txt" "--checkpoint;soft.txt" "--csv;sub/../data.txt")
    file(MAKE_DIRECTORY ${WORK}/sub)
    train(--steps 2 --data data.txt ${args})
    list(GET args 0 flag)
    expect("${args}" 2 "${flag} '[^']+' is the same file as --data 'data.txt'")
    expect_no_step("${args}")
    expect_unchanged("${args}" data.txt ${data_hash})
  endforeach()
  train(--steps 2 --data data.txt --checkpoint run.out --csv ./run.out)
  expect("--checkpoint run.out --csv ./run.out" 2 "--checkpoint 'run.out' and --csv './run.out' are the same file")
  expect_no_step("--checkpoint and --csv")
  # --csv naming --resume would replace the checkpoint the run continues from.
  train(--steps 4 --stop-after 2 --data data.txt --checkpoint run.ckpt)
  expect("a first run" 0)
  file(SHA256 ${WORK}/run.ckpt ckpt_hash)
  train(--steps 4 --data data.txt --resume run.ckpt --checkpoint next.ckpt --csv ./run.ckpt)
  expect("--csv naming --resume" 2 "--csv './run.ckpt' is the same file as --resume 'run.ckpt'")
  expect_unchanged("--csv naming --resume" run.ckpt ${ckpt_hash})
  # --export and --dump-batches are outputs like the others: never an input, never another output.
  foreach(flag --export --dump-batches)
    train(--steps 2 --data data.txt ${flag} ./data.txt)
    expect("${flag} naming --data" 2 "${flag} './data.txt' is the same file as --data 'data.txt'")
    expect_no_step("${flag} naming --data")
    expect_unchanged("${flag} naming --data" data.txt ${data_hash})
    train(--steps 4 --data data.txt --resume run.ckpt --checkpoint next.ckpt ${flag} ./run.ckpt)
    expect("${flag} naming --resume" 2 "${flag} './run.ckpt' is the same file as --resume 'run.ckpt'")
    expect_unchanged("${flag} naming --resume" run.ckpt ${ckpt_hash})
  endforeach()
  file(CREATE_LINK ${WORK}/run.ckpt ${WORK}/hard.ckpt)
  foreach(flag --export --dump-batches)
    train(--steps 4 --data data.txt --resume run.ckpt --checkpoint next.ckpt ${flag} hard.ckpt)
    expect("${flag} naming --resume by a hard link" 2 "${flag} 'hard.ckpt' is the same file as --resume 'run.ckpt'")
    expect_unchanged("${flag} naming --resume by a hard link" run.ckpt ${ckpt_hash})
  endforeach()
  # A resumed run's CSV, an export and a batch dump: each a different file.
  train(--steps 4 --data data.txt --resume run.ckpt --checkpoint next.ckpt --csv run.csv --dump-batches ./run.csv)
  expect("--dump-batches naming a resumed run's --csv" 2 "--csv 'run.csv' and --dump-batches './run.csv' are the same file")
  train(--steps 2 --data data.txt --export out.bin --dump-batches ./out.bin)
  expect("--dump-batches naming --export" 2 "--export 'out.bin' and --dump-batches './out.bin' are the same file")
  # --init-from is an input: no output may replace it.
  train(--steps 2 --data data.txt --export weights.safetensors)
  expect("an export" 0)
  file(SHA256 ${WORK}/weights.safetensors weights_hash)
  foreach(flag --export --dump-batches --csv --checkpoint)
    train(--steps 2 --data data.txt --init-from weights.safetensors ${flag} ./weights.safetensors --overwrite)
    expect("${flag} naming --init-from" 2 "${flag} './weights.safetensors' is the same file as --init-from 'weights.safetensors'")
    expect_no_step("${flag} naming --init-from")
    expect_unchanged("${flag} naming --init-from" weights.safetensors ${weights_hash})
  endforeach()
  # --checkpoint naming --resume is how a run continues.
  train(--steps 4 --data data.txt --resume run.ckpt --checkpoint ./run.ckpt)
  expect("--checkpoint naming --resume" 0 "resumed from 'run.ckpt' at step 2")

elseif(CASE STREQUAL "foreign")
  # A text file is neither the program's CSV nor its checkpoint: refused, then replaced with --overwrite.
  file(WRITE ${WORK}/notes.txt "my notes, which no training run should replace\n")
  file(SHA256 ${WORK}/notes.txt notes_hash)
  foreach(flag --csv --checkpoint --export --dump-batches)
    train(--steps 2 --data data.txt ${flag} notes.txt)
    expect("${flag} notes.txt" 2 "${flag} 'notes.txt' exists and is not" "--overwrite")
    expect_no_step("${flag} notes.txt")
    expect_unchanged("${flag} notes.txt" notes.txt ${notes_hash})
  endforeach()
  # The program's own export and batch dump are replaced by a fresh run; a dump is not an export.
  train(--steps 2 --data data.txt --export run.safetensors --dump-batches run.batches)
  expect("a run with an export and a batch dump" 0)
  train(--steps 2 --data data.txt --export run.safetensors --dump-batches run.batches)
  expect("a second run over them" 0)
  train(--steps 2 --data data.txt --export run.batches)
  expect("--export naming a batch dump" 2 "--export 'run.batches' exists and is not a safetensors file")
  train(--steps 2 --data data.txt --dump-batches run.safetensors)
  expect("--dump-batches naming an export" 2 "--dump-batches 'run.safetensors' exists and is not this program's batch dump")
  # A named pipe (or any special file) is never replaced by a regular file, even with --overwrite.
  execute_process(COMMAND mkfifo ${WORK}/pipe RESULT_VARIABLE mkfifo_failed)
  if(mkfifo_failed)
    message(FATAL_ERROR "${CASE}: mkfifo failed")
  endif()
  foreach(flag --export --dump-batches --csv --checkpoint)
    train(--steps 2 --data data.txt ${flag} pipe --overwrite)
    expect("${flag} naming a pipe" 2 "${flag} 'pipe' is not a regular file")
    expect_no_step("${flag} naming a pipe")
    expect_fifo("${flag} naming a pipe" pipe)
  endforeach()
  foreach(flag --export --dump-batches)
    train(--steps 2 --data data.txt ${flag} /dev/null --overwrite)
    expect("${flag} /dev/null" 2 "${flag} '/dev/null' is not a regular file")
  endforeach()
  # The program's own outputs are replaced by a fresh run; a CSV is not a checkpoint, nor the reverse.
  train(--steps 2 --data data.txt --csv run.csv --checkpoint run.ckpt)
  expect("a first run" 0)
  train(--steps 2 --data data.txt --csv run.csv --checkpoint run.ckpt)
  expect("a second run over the first one's outputs" 0 "checkpoint at step 2")
  train(--steps 2 --data data.txt --csv run.ckpt)
  expect("--csv naming a checkpoint" 2 "--csv 'run.ckpt' exists and is not this program's loss CSV")
  train(--steps 2 --data data.txt --checkpoint run.csv)
  expect("--checkpoint naming a CSV" 2 "--checkpoint 'run.csv' exists and is not an mxkit checkpoint")
  train(--steps 2 --data data.txt --csv notes.txt --overwrite)
  expect("--overwrite" 0)
  file(READ ${WORK}/notes.txt csv)
  if(NOT csv MATCHES "^step,loss,")
    message(FATAL_ERROR "${CASE}: --overwrite did not replace notes.txt with the CSV:\n${csv}")
  endif()
  file(MAKE_DIRECTORY ${WORK}/folder)
  train(--steps 2 --data data.txt --csv folder --overwrite)
  expect("--csv naming a folder, even with --overwrite" 2 "--csv 'folder' is a folder")

elseif(CASE STREQUAL "unwritable")
  file(WRITE ${WORK}/plain.txt "a regular file\n")
  string(REPEAT "n" 300 too_long)
  file(MAKE_DIRECTORY ${WORK}/folder)
  foreach(args IN ITEMS "--csv;missing/run.csv" "--checkpoint;missing/run.ckpt" "--csv;plain.txt/run.csv"
                        "--export;missing/w.safetensors" "--export;plain.txt/w.safetensors" "--export;folder"
                        "--export;${too_long}.st" "--dump-batches;missing/b.bin" "--dump-batches;plain.txt/b.bin"
                        "--dump-batches;folder" "--checkpoint;${too_long}.ckpt")
    train(--steps 2 --data data.txt ${args})
    list(GET args 0 flag)
    expect("${args}" 2 "${flag} '")
    expect_no_step("${args}")
  endforeach()
  expect("a 305-byte name" 2 "the file name is 305 bytes, longer than the [0-9]+ bytes")  # (the loop's last run)
  train(--steps 2 --data data.txt --csv missing/run.csv)
  expect("a missing folder" 2 "its folder 'missing' does not exist")
  train(--steps 2 --data data.txt --csv plain.txt/run.csv)
  expect("a path under a regular file" 2 "its folder 'plain.txt' is not a folder")
  train(--steps 2 --data data.txt --export missing/w.safetensors)
  expect("--export in a missing folder" 2 "--export 'missing/w.safetensors': its folder 'missing' does not exist")
  train(--steps 2 --data data.txt --export plain.txt/w.safetensors)
  expect("--export under a regular file" 2 "--export 'plain.txt/w.safetensors': its folder 'plain.txt' is not a folder")
  train(--steps 2 --data data.txt --export folder --overwrite)
  expect("--export naming a folder" 2 "--export 'folder' is a folder")
  train(--steps 2 --data data.txt --dump-batches folder)
  expect("--dump-batches naming a folder" 2 "--dump-batches 'folder' is a folder")
  # A legal 250-byte name: saved, or (where the temporary name is longer than the file system
  # allows) refused before the first step; never trained and then lost.
  string(REPEAT "l" 246 long)
  train(--steps 2 --data data.txt --csv ${long}.csv)
  if(rc EQUAL 0)
    if(NOT EXISTS ${WORK}/${long}.csv)
      message(FATAL_ERROR "${CASE}: a 250-byte name: exit 0 but no CSV\n${out}")
    endif()
  else()
    expect("a 250-byte name" 2 "--csv '${long}.csv': the temporary file the save writes first")
    expect_no_step("a 250-byte name")
  endif()

elseif(CASE STREQUAL "resume_config")
  train(--steps 6 --stop-after 2 --data data.txt --checkpoint run.ckpt)
  expect("a first run" 0)
  file(SHA256 ${WORK}/run.ckpt ckpt_hash)
  train(--steps 8 --lr 1e-3 --seed 5 --recipe bf16 --data data.txt --resume run.ckpt --checkpoint run.ckpt)
  expect("other --steps, --lr, --seed, --recipe" 2 "--resume 'run.ckpt' comes from a run with other settings"
         "--recipe mxfp4 vs bf16" "--steps 6 vs 8" "--lr 0.0006 vs 0.001" "--seed 1234 vs 5" "--resume-any-config")
  expect_no_step("other settings")
  file(WRITE ${WORK}/other.txt "${text}${text}")
  train(--steps 6 --data other.txt --resume run.ckpt --checkpoint run.ckpt)
  expect("other --data" 2 "--data 'data.txt' \\([0-9]+ bytes, checksum [0-9a-f]+\\) vs 'other.txt' \\([0-9]+ bytes, checksum")
  train(--steps 6 --layers 2 --ffn 384 --data data.txt --resume run.ckpt --checkpoint run.ckpt)
  expect("another model" 2 "--resume 'run.ckpt': the model differs: layers 1 vs 2, ffn 256 vs 384")
  train(--steps 6 --layers 2 --data data.txt --resume run.ckpt --checkpoint run.ckpt --resume-any-config)
  expect("another model with --resume-any-config" 2 "the model differs: layers 1 vs 2")
  expect_unchanged("refused resumptions" run.ckpt ${ckpt_hash})
  train(--steps 8 --data data.txt --resume run.ckpt --checkpoint run.ckpt --resume-any-config)
  expect("--resume-any-config" 0 "warning: --resume 'run.ckpt': continuing with settings that differ [^\n]*--steps 6 vs 8"
         "resumed from 'run.ckpt' at step 2" "checkpoint at step 8")
  train(--steps 8 --data data.txt --resume-any-config)
  expect("--resume-any-config alone" 2 "--resume-any-config needs --resume")
  # A folder of shards records and compares the same settings (nn/sharded_checkpoint.hpp's manifest),
  # on 2 ranks of the host program (a GPU program takes its ranks from its launcher, one process per
  # GPU, and refuses --ranks).
  get_filename_component(program_name ${PROGRAM} NAME)
  if(program_name MATCHES "^05_train")
    train(--steps 6 --stop-after 2 --data data.txt --ranks 2 --checkpoint shards)
    expect("a first run on 2 ranks" 0 "checkpoint at step 2")
    file(SHA256 ${WORK}/shards/manifest manifest_hash)
    train(--steps 8 --lr 1e-3 --seed 5 --recipe bf16 --data data.txt --ranks 2 --resume shards --checkpoint shards)
    expect("shards: other --steps, --lr, --seed, --recipe" 2 "--resume 'shards' comes from a run with other settings"
           "--recipe mxfp4 vs bf16" "--steps 6 vs 8" "--lr 0.0006 vs 0.001" "--seed 1234 vs 5" "--resume-any-config")
    expect_no_step("shards: other settings")
    train(--steps 6 --data other.txt --ranks 2 --resume shards --checkpoint shards)
    expect("shards: other --data" 2 "--data 'data.txt' \\([0-9]+ bytes, checksum [0-9a-f]+\\) vs 'other.txt'")
    # Another head layout with the same tensor shapes (d-model 128: head dim 64 x 2 heads, or 32 x 4).
    train(--steps 6 --heads 4 --kv-heads 2 --data data.txt --ranks 2 --resume shards --checkpoint shards)
    expect("shards: another head layout" 2 "--resume 'shards': the model differs: heads 2 vs 4, kv-heads 1 vs 2")
    train(--steps 6 --heads 4 --kv-heads 2 --data data.txt --resume shards --checkpoint one.ckpt)
    expect("shards resumed on one rank: another head layout" 2 "the model differs: heads 2 vs 4, kv-heads 1 vs 2")
    expect_unchanged("shards: refused resumptions" shards/manifest ${manifest_hash})
    train(--steps 6 --data data.txt --ranks 2 --resume shards --checkpoint shards)
    expect("shards: the same settings" 0 "resumed from 'shards' at step 2" "checkpoint at step 6")
  endif()
  if(DEFINED V1_CHECKPOINT)  # a version 1 file (of another, smaller model): a warning, then the model's refusal
    train(--steps 6 --data data.txt --resume ${V1_CHECKPOINT} --checkpoint new.ckpt)
    expect("a version 1 checkpoint" 1 "warning: --resume '[^']+' is a format version 1 checkpoint, which records no run settings")
    expect_no_step("a version 1 checkpoint")
  endif()

elseif(CASE STREQUAL "diverged")
  train(--steps 6 --stop-after 2 --data data.txt --checkpoint run.ckpt --csv run.csv)
  expect("a good run" 0)
  file(SHA256 ${WORK}/run.ckpt ckpt_hash)
  # --lr 1e30: the loss of step 2 is NaN; checkpoints would be due at 2, 4 and 6.
  train(--steps 6 --lr 1e30 --checkpoint-every 2 --data data.txt --checkpoint run.ckpt --csv run.csv)
  # (The host program reads the loss of step 2 as NaN; the GPU program's loss of step 2 stays
  # finite and its gradient norm is NaN. Either stops the run there.)
  expect("--lr 1e30" 1 "the run diverged at step 2: the (training loss|gradient norm) is nan"
         "nothing was saved to --checkpoint 'run.ckpt'")
  expect_unchanged("--lr 1e30" run.ckpt ${ckpt_hash})
  # Read every 2 steps: the message names the window.
  train(--steps 6 --lr 1e30 --log-every 2 --data data.txt)
  expect("--lr 1e30 --log-every 2" 1 "the run diverged between steps 1 and 2 \\(the loss is read every --log-every 2 steps\\)")

elseif(CASE STREQUAL "messages")
  execute_process(COMMAND ${PROGRAM} --layers 18446744073709551615 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  expect("--layers 2^64 - 1" 2 "the model is too large: --layers 18446744073709551615")
  # Numbers parsed into the type that uses them, within the limits --help states.
  foreach(n 0 1025 2147483648 4294967297 -1)
    train(--steps 2 --data data.txt --ranks ${n})
    expect("--ranks ${n}" 2 "--ranks: expected an integer from 1 to 1024, got '${n}'")
  endforeach()
  train(--steps 2 --data data.txt --ranks 2 --micro-batches 9223372036854775808)
  expect("--ranks 2 --micro-batches 2^63" 2 "--steps 2 x --ranks 2 x --micro-batches 9223372036854775808 x --batch 2 x \\(--seq 64 \\+ 1\\) tokens is 2\\^64 or more")
  train(--steps 2 --data data.txt --micro-batches 18446744073709551615)
  expect("--micro-batches 2^64 - 1" 2 "--micro-batches 18446744073709551615 x --batch 2")
  # Sharding without ranks: a usage error naming the flags, not data_parallel's internal message.
  foreach(args IN ITEMS "--shard;full" "--shard;optimizer;--ranks;1")
    train(--steps 2 --data data.txt ${args})
    list(GET args 1 kind)
    expect("${args}" 2 "--shard ${kind} needs several ranks: 05_train --ranks N")
    expect_no_step("${args}")
  endforeach()
  file(MAKE_DIRECTORY ${WORK}/folder)
  train(--steps 2 --data folder)
  expect("--data naming a folder" 1 "corpus: 'folder': reading failed after 0 bytes: [^:\n]+\n")
  if(out MATCHES "Is a directory: Is a directory")
    message(FATAL_ERROR "${CASE}: --data naming a folder: the OS reason twice\n${out}")
  endif()
  if(MEMORY_LIMIT)  # an endless device under a 1 GiB address space (a plain build: sanitizers reserve far more)
    execute_process(COMMAND sh -c "ulimit -v 1048576 && exec \"$0\" \"$@\"" ${PROGRAM} ${tiny} --steps 2 --data /dev/zero
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    expect("--data /dev/zero" 1 "corpus: '/dev/zero': too large to hold in memory")
  endif()

elseif(CASE STREQUAL "interchange")
  # --shard full exports the gathered masters: the same bits as ZeRO-1's export (the same training).
  train(--steps 3 --data data.txt --ranks 2 --shard full --export full.safetensors)
  expect("--ranks 2 --shard full --export" 0 "trained steps 1..3 of 3")
  train(--steps 3 --data data.txt --ranks 2 --shard optimizer --export zero1.safetensors)
  expect("--ranks 2 --shard optimizer --export" 0)
  file(SHA256 ${WORK}/full.safetensors full_hash)
  file(SHA256 ${WORK}/zero1.safetensors zero1_hash)
  if(NOT full_hash STREQUAL zero1_hash)
    message(FATAL_ERROR "${CASE}: the --shard full export differs from the --shard optimizer one")
  endif()
  train(--steps 2 --data data.txt --init-from full.safetensors)
  expect("--init-from the --shard full export" 0)
  # --dump-batches records every micro-batch of every rank, in order: 2 steps of 2 micro-batches
  # (on one rank, or one on each of 2 ranks) are the loader's batches 0-3, which 4 single steps train.
  train(--steps 4 --data data.txt --dump-batches single.bin)
  expect("4 steps" 0)
  train(--steps 2 --data data.txt --micro-batches 2 --dump-batches micro.bin)
  expect("2 steps of 2 micro-batches" 0)
  train(--steps 2 --data data.txt --ranks 2 --dump-batches ranks.bin)
  expect("2 steps on 2 ranks" 0)
  read_hex(single single.bin 32)
  read_hex(micro micro.bin 32)
  read_hex(ranks ranks.bin 32)
  string(LENGTH "${single}" single_length)
  if(NOT single_length EQUAL 1040)  # 4 steps x 2 rows x 65 bytes, two hex digits each
    message(FATAL_ERROR "${CASE}: single.bin holds ${single_length} hex digits of windows, not 1040")
  endif()
  if(NOT micro STREQUAL single OR NOT ranks STREQUAL single)
    message(FATAL_ERROR "${CASE}: the windows of 2 micro-batches or 2 ranks are not the loader's batches 0-3")
  endif()
  file(READ ${WORK}/micro.bin header LIMIT 32 HEX)
  # "MXBATCH1", 2 steps, 4 rows (2 micro-batches x --batch 2), 65 bytes a row.
  if(NOT header STREQUAL "4d58424154434831020000000000000004000000000000004100000000000000")
    message(FATAL_ERROR "${CASE}: micro.bin's header is ${header}")
  endif()

elseif(CASE STREQUAL "to_target")
  # Reached at the first evaluation (step 2 of 10): the run stops there, saves its checkpoint and
  # reports the time to train; the CSV's rows end at step 2, with tokens and times.
  train(--steps 10 --eval-every 2 --eval-batches 2 --target-loss 100 --data data.txt --csv reached.csv --checkpoint reached.ckpt)
  expect("--target-loss 100" 0 "eval +2/10 +loss [0-9.]+ +\\(2 held-out batches\\) +target reached"
         "checkpoint at step 2: reached.ckpt" "trained steps 1\\.\\.2 of 10"
         "target reached: held-out loss [0-9.]+ <= --target-loss 100 at step 2, after 256 tokens \\(4 sequences\\) and 1 evaluation\n"
         "time to train: [0-9.]+ s \\(MLPerf Training's rule: from run start to the end of the evaluation that reached the target"
         "initialization \\(not timed: model, data, --init-from, --resume\\): [0-9.]+ s")
  if(out MATCHES "step +3/10")
    message(FATAL_ERROR "${CASE}: the run went on past the evaluation that reached the target\n${out}")
  endif()
  file(READ ${WORK}/reached.csv csv)
  set(n "[0-9]+\\.[0-9]+")
  if(NOT csv MATCHES "^step,loss,eval_loss,tokens_per_s,lr,tokens,time_s\n1,${n},,${n},[0-9.e+-]+,128,${n}\n2,${n},${n},${n},[0-9.e+-]+,256,${n}\n$")
    message(FATAL_ERROR "${CASE}: reached.csv:\n${csv}")
  endif()
  # Not reached by the end of --steps: every evaluation a row, the reason said, exit status 3.
  train(--steps 4 --eval-every 2 --eval-batches 2 --target-loss 0.001 --data data.txt --csv missed.csv)
  expect("--target-loss 0.001" 3 "target not reached: no evaluation of steps 1\\.\\.4 reached --target-loss 0\\.001 \\(2 evaluations\\)"
         "exit status 3: the run ended without reaching --target-loss")
  file(READ ${WORK}/missed.csv csv)
  if(NOT csv MATCHES "\n2,${n},${n},${n},[0-9.e+-]+,256,${n}\n3,[^\n]+,384,${n}\n4,${n},${n},${n},[0-9.e+-]+,512,${n}\n$")
    message(FATAL_ERROR "${CASE}: missed.csv:\n${csv}")
  endif()
  # The times grow: time_s of step 4 is at least step 2's.
  string(REGEX MATCH "\n2,[^\n]*,([0-9.]+)\n" row2 "${csv}")
  set(t2 ${CMAKE_MATCH_1})
  string(REGEX MATCH "\n4,[^\n]*,([0-9.]+)\n" row4 "${csv}")
  if(NOT CMAKE_MATCH_1 GREATER_EQUAL t2)
    message(FATAL_ERROR "${CASE}: time_s of step 4 (${CMAKE_MATCH_1}) is below step 2's (${t2})")
  endif()
  # A part of a run (--stop-after) that has not reached it yet is not a failure.
  train(--steps 4 --stop-after 2 --eval-every 2 --eval-batches 2 --target-loss 0.001 --data data.txt)
  expect("--stop-after 2 of 4" 0 "--stop-after ended this part of the run before --steps")
  # Several ranks stop at the same evaluation (the largest of their losses decides).
  train(--steps 10 --eval-every 2 --eval-batches 2 --target-loss 100 --data data.txt --ranks 2 --shard full)
  expect("--ranks 2 --shard full --target-loss 100" 0 "target reached: held-out loss [0-9.]+ <= --target-loss 100 at step 2, after 512 tokens \\(8 sequences\\)")
  train(--steps 4 --eval-every 0 --target-loss 3 --data data.txt)
  expect("--target-loss without evaluations" 2 "--target-loss needs evaluations: --eval-every N with N > 0")

elseif(CASE STREQUAL "preset")
  # The preset's values and sources in --help; a run prints them with the values in effect and
  # the scaling to its ranks (the global batch of 32 kept through micro-batches).
  execute_process(COMMAND ${PROGRAM} --help RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  expect("--help" 0 "--preset NAME" "mlperf-llama31-8b: MLPerf Training's Llama 3.1 8B pretraining reference"
         "model +llama3\\.1-8b \\(32 layers, d 4096, 32 heads, 8 KV, ffn 14336, vocab 128256\\)"
         "--seq +8192 +reference pretrain_llama31\\.py seq_length" "--global-batch +32 +reference config_H200_1x8x1_8b\\.sh GBS"
         "--batch +2 +reference config_H200_1x8x1_8b\\.sh MBS" "--lr +0\\.0005 +reference config_H200_1x8x1_8b\\.sh MAX_LR"
         "--warmup +512 +reference config_H200_1x8x1_8b\\.sh WARMUP_STEPS" "--steps +1200000 +reference pretrain_llama31\\.py --max_steps"
         "--adam-betas +0\\.9,0\\.95 +NeMo recipes/optim/adam\\.py" "--adam-eps +1e-05 +NeMo" "--weight-decay +0\\.1 +NeMo"
         "--clip-norm +1 +NeMo" "--eval-every +384 +reference EVAL_EVERY 12288 sequences / GBS 32"
         "--eval-batches +512 +reference --eval_tokens 1024 sequences / MBS 2" "--target-loss +3\\.3 +reference --target_log_ppl")
  set(small --preset mlperf-llama31-8b --layers 1 --d-model 128 --heads 2 --kv-heads 1 --ffn 256 --vocab 256 --seq 64 --steps 2
            --warmup 1 --eval-every 2 --eval-batches 1 --recipe bf16 --data data.txt)
  execute_process(COMMAND ${PROGRAM} ${small} --ranks 2 WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  expect("the preset on 2 ranks" 3 "preset mlperf-llama31-8b \\(mlperf_llama31_8b\\.hpp cites each source\\)"
         "run: 2 steps, lr 0\\.0005 \\(warmup 1, cosine to 5e-05\\), seed 1234; AdamW betas 0\\.9, 0\\.95, eps 1e-05, weight decay 0\\.1, clip 1\n"
         "--seq +8192 [^\n]*; now 64 \\(a later flag\\)" "--warmup +512 [^\n]*; now 1 \\(a later flag\\)"
         "--lr +0\\.0005 +reference config_H200_1x8x1_8b\\.sh MAX_LR [^\n;]*\n"
         "scaling: global batch 32 sequences = 2 ranks x 8 micro-batches x --batch 2 \\(the reference: 8 GPUs x 2 x 2\\); the reference's global batch is kept"
         "target: held-out loss <= 3\\.3" "ranks: 2 x 8 micro-batches of 2 x 64")
  # --micro-batches after the preset replaces its global batch: printed, not rescaled.
  execute_process(COMMAND ${PROGRAM} ${small} --micro-batches 1 WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  expect("the preset with --micro-batches 1" 3 "--global-batch +32 [^\n]*; now not set \\(--micro-batches\\)"
         "scaling: global batch 2 sequences = 1 rank x 1 micro-batch x --batch 2 [^\n]*not the reference's 32: --lr, --warmup and --eval-every are kept as given")
  train(--steps 2 --global-batch 6 --ranks 2 --data data.txt)
  expect("--global-batch 6 on 2 ranks of --batch 2" 2 "--global-batch 6 is not a multiple of 2 ranks x --batch 2")
  train(--steps 2 --preset mlperf-llama3-70b --data data.txt)
  expect("an unknown preset" 2 "--preset: unknown preset 'mlperf-llama3-70b' \\(known: mlperf-llama31-8b\\)")
  train(--steps 2 --adam-betas 0.9 --data data.txt)
  expect("--adam-betas without B2" 2 "--adam-betas: expected B1,B2, each in \\[0, 1\\), got '0\\.9'")

elseif(CASE STREQUAL "hf_sharded")
  # --export-max-shard writes a Hugging Face sharded checkpoint; --init-from reads it back (by its
  # folder, by its index; on 2 fully sharded ranks each rank its own rows) and, trained one step at
  # --lr 1e-30 (no weight moves), exports the same bytes. (tests/train/check_hf_sharded.py: shards
  # written by NumPy.)
  train(--steps 2 --data data.txt --export ref --export-max-shard 40KB)
  expect("a sharded export" 0)
  file(GLOB shards RELATIVE ${WORK}/ref ${WORK}/ref/model-*-of-*.safetensors)
  list(LENGTH shards count)
  if(count LESS 4 OR NOT EXISTS ${WORK}/ref/model.safetensors.index.json)
    message(FATAL_ERROR "${CASE}: ref/ holds ${count} shards: ${shards}")
  endif()
  set(still --steps 1 --warmup 0 --lr 1e-30 --data data.txt --export-max-shard 40KB)
  foreach(args IN ITEMS "--init-from;ref;--export;again" "--init-from;ref/model.safetensors.index.json;--export;again2;--ranks;2;--shard;full")
    list(GET args 3 again)
    train(${still} ${args})
    set(line "weights from 'ref[^']*': 12 tensors in ${count} files, [0-9.]+ MiB; this rank read [0-9.]+ MiB \\(([0-9]+)%\\)")
    expect("${args}" 0 "${line}")
    string(REGEX MATCH "${line}" line "${out}")
    set(percent ${CMAKE_MATCH_1})
    # One rank reads it all; rank 0 of 2 its own shard of each weight: about half (the tensors that
    # merely touch its shard, read whole, would be about 70%).
    if((args MATCHES "--ranks" AND (percent LESS 40 OR percent GREATER 60)) OR (NOT args MATCHES "--ranks" AND NOT percent EQUAL 100))
      message(FATAL_ERROR "${CASE}: ${args}: rank 0 read ${percent}% of the checkpoint")
    endif()
    foreach(f IN LISTS shards ITEMS model.safetensors.index.json)
      file(SHA256 ${WORK}/ref/${f} want)
      file(SHA256 ${WORK}/${again}/${f} got)
      if(NOT want STREQUAL got)
        message(FATAL_ERROR "${CASE}: ${args}: ${again}/${f} differs from ref/${f}")
      endif()
    endforeach()
  endforeach()
  # Through a folder of one shard (1GB) and back to 40 kB shards: the same index and shards.
  train(${still} --init-from ref --export whole --export-max-shard 1GB)
  expect("one shard" 0)
  if(NOT EXISTS ${WORK}/whole/model-00001-of-00001.safetensors)
    message(FATAL_ERROR "${CASE}: --export-max-shard 1GB did not write one shard")
  endif()
  train(${still} --init-from whole --export again3)
  expect("a folder of one shard in, 40 kB shards out" 0)
  file(SHA256 ${WORK}/again3/model.safetensors.index.json a)
  file(SHA256 ${WORK}/ref/model.safetensors.index.json b)
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "${CASE}: a round trip through one shard changed the index")
  endif()
  # Damaged: a shard gone, an entry outside the folder; refused before the first step, naming them.
  file(COPY ${WORK}/ref/ DESTINATION ${WORK}/gone)
  list(GET shards 1 second)
  file(REMOVE ${WORK}/gone/${second})
  train(--steps 2 --data data.txt --init-from gone)
  expect("a shard gone" 1 "Hugging Face index 'gone/model\\.safetensors\\.index\\.json': shard '${second}': safetensors '[^']*${second}': cannot open the file")
  expect_no_step("a shard gone")
  file(COPY ${WORK}/ref/ DESTINATION ${WORK}/outside)
  file(READ ${WORK}/outside/model.safetensors.index.json index)
  string(REPLACE "\"lm_head.weight\": \"" "\"lm_head.weight\": \"../ref/" index "${index}")
  file(WRITE ${WORK}/outside/model.safetensors.index.json "${index}")
  train(--steps 2 --data data.txt --init-from outside)
  expect("an entry outside the folder" 1 "weight_map maps tensor 'lm_head\\.weight' to '\\.\\./ref/model-[0-9]+-of-[0-9]+\\.safetensors', which has a '\\.\\.' part")
  expect_no_step("an entry outside the folder")
  # The export's folder: an input is never replaced; a file, or a folder of something else, is not written into.
  train(--steps 2 --data data.txt --init-from ref --export ref --export-max-shard 40KB)
  expect("--export naming --init-from's folder" 2 "--export 'ref/model\\.safetensors\\.index\\.json' is the same file as --init-from 'ref/model\\.safetensors\\.index\\.json'")
  file(WRITE ${WORK}/plain "a file\n")
  train(--steps 2 --data data.txt --export plain --export-max-shard 40KB)
  expect("--export-max-shard onto a file" 2 "--export 'plain' is a file; --export-max-shard writes a folder")
  file(MAKE_DIRECTORY ${WORK}/notes)
  file(WRITE ${WORK}/notes/todo.txt "mine\n")
  train(--steps 2 --data data.txt --export notes --export-max-shard 40KB)
  expect("--export-max-shard into a folder of something else" 2 "--export 'notes' is a folder without a Hugging Face index")
  expect_no_step("--export-max-shard into a folder of something else")
  train(--steps 2 --data data.txt --export-max-shard 40KB)
  expect("--export-max-shard alone" 2 "--export-max-shard needs --export")
  train(--steps 2 --data data.txt --export x --export-max-shard 40kB)
  expect("a size in lowercase kB" 2 "--export-max-shard: expected a positive size in bytes, optionally with KB, MB, GB, KiB, MiB or GiB, got '40kB'")

elseif(CASE STREQUAL "lora")
  # --lora end to end: a base pretrained on the stories (--export), LoRA-fine-tuned on the other
  # corpus beside them (qa.txt), healed from MXFP4 to FP8 partway: the header says what trains,
  # the held-out loss falls, the base's file is untouched. (tests/train/catch2_test_lora_program.cpp
  # checks that the base's weights stay bit for bit and the option checks one by one.)
  get_filename_component(data_dir ${DATA} DIRECTORY)
  file(READ ${data_dir}/qa.txt qa LIMIT 20000)
  file(WRITE ${WORK}/qa.txt "${qa}")
  train(--steps 40 --lr 3e-3 --data data.txt --export base.safetensors)
  expect("the base" 0 "trained steps 1\\.\\.40 of 40")
  file(SHA256 ${WORK}/base.safetensors base_hash)
  train(--steps 2 --data qa.txt --lora 4)
  expect("--lora without --init-from" 2 "--lora 4 fine-tunes a base model: give its weights with --init-from PATH")
  expect_no_step("--lora without --init-from")
  train(--steps 2 --data qa.txt --lora 4 --init-from base.safetensors --export lora.safetensors)
  expect("--lora with --export" 2 "--lora 4 does not take --export")
  get_filename_component(program_name ${PROGRAM} NAME)
  if(program_name MATCHES "^05_train")  # (a GPU program takes its ranks from its launcher)
    train(--steps 2 --data qa.txt --lora 4 --init-from base.safetensors --ranks 2)
    expect("--lora on 2 ranks" 2 "--lora 4 trains on one rank: 2 ranks are not supported with it")
    expect_no_step("--lora on 2 ranks")
  endif()
  train(--steps 2 --data qa.txt --lora-targets qkv,up --lora 4 --init-from base.safetensors)
  expect("an unknown target" 2 "--lora-targets: unknown target 'up' in 'qkv,up' \\(expected a comma list of qkv, out, gate_up, down\\)")
  # Rank 16 (the recipe's), so that a GPU program runs the adapters' GEMMs at the K it runs at scale.
  train(--steps 30 --lr 3e-3 --data qa.txt --lora 16 --init-from base.safetensors --switch-to fp8 --switch-at 18
        --eval-every 10 --eval-batches 4 --csv lora.csv)
  # 1 layer, d_model 128: QKV 128 -> 256 and output 128 -> 128, A (16, 128) and B (out, 16) each.
  expect("the LoRA run" 0 "LoRA: rank 16, alpha 32 \\(scale 2\\), adapters on qkv,out of every layer, seed 1236; trainable 10240 parameters"
         "weights from 'base\\.safetensors'" "step 18: switched to the recipe" "trained steps 1\\.\\.30 of 30: final training loss [0-9]")
  expect_unchanged("--init-from of the LoRA run" base.safetensors ${base_hash})
  # The held-out loss (the same batches each time) falls from the first evaluation to the last.
  file(STRINGS ${WORK}/lora.csv rows)
  set(evals "")
  foreach(row IN LISTS rows)
    if(row MATCHES "^(10|30),[^,]*,([0-9.]+),")
      list(APPEND evals ${CMAKE_MATCH_2})
    endif()
  endforeach()
  list(LENGTH evals n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "${CASE}: lora.csv has no held-out loss at steps 10 and 30:\n${rows}")
  endif()
  list(GET evals 0 first)
  list(GET evals 1 last)
  if(NOT last LESS first)
    message(FATAL_ERROR "${CASE}: the held-out loss did not fall: ${first} at step 10, ${last} at step 30")
  endif()

else()
  message(FATAL_ERROR "train_program_test.cmake: unknown CASE '${CASE}'")
endif()
file(REMOVE_RECURSE ${WORK})
