# SPDX-License-Identifier: Apache-2.0
# The training program's refusals (ctest example.05_train.<CASE>, examples/CMakeLists.txt): each
# case runs the program (a tiny model, a few steps, about a second each) on files made in WORK and
# checks its exit status, its message and that no input or older output was touched.
#   cmake -DPROGRAM=<05_train> -DWORK=<empty folder> -DDATA=<a text file> -DCASE=<case> [-DV1_CHECKPOINT=<file>]
#         [-DMEMORY_LIMIT=ON] -P train_program_test.cmake
# Cases: aliases (outputs that are inputs or each other), foreign (existing files that are not the
# program's), unwritable (outputs that cannot be saved), resume_config (another run's checkpoint),
# diverged (a non-finite loss), messages (sizes too large, read errors).
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
  # --checkpoint naming --resume is how a run continues.
  train(--steps 4 --data data.txt --resume run.ckpt --checkpoint ./run.ckpt)
  expect("--checkpoint naming --resume" 0 "resumed from 'run.ckpt' at step 2")

elseif(CASE STREQUAL "foreign")
  # A text file is neither the program's CSV nor its checkpoint: refused, then replaced with --overwrite.
  file(WRITE ${WORK}/notes.txt "my notes, which no training run should replace\n")
  file(SHA256 ${WORK}/notes.txt notes_hash)
  foreach(flag --csv --checkpoint)
    train(--steps 2 --data data.txt ${flag} notes.txt)
    expect("${flag} notes.txt" 2 "${flag} 'notes.txt' exists and is not" "--overwrite")
    expect_no_step("${flag} notes.txt")
    expect_unchanged("${flag} notes.txt" notes.txt ${notes_hash})
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
  foreach(args IN ITEMS "--csv;missing/run.csv" "--checkpoint;missing/run.ckpt" "--csv;plain.txt/run.csv"
                        "--checkpoint;${too_long}.ckpt")
    train(--steps 2 --data data.txt ${args})
    list(GET args 0 flag)
    expect("${args}" 2 "${flag} '")
    expect_no_step("${args}")
  endforeach()
  expect("a 305-byte name" 2 "the file name is 305 bytes, longer than the [0-9]+ bytes")
  train(--steps 2 --data data.txt --csv missing/run.csv)
  expect("a missing folder" 2 "its folder 'missing' does not exist")
  train(--steps 2 --data data.txt --csv plain.txt/run.csv)
  expect("a path under a regular file" 2 "its folder 'plain.txt' is not a folder")
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
  expect("--lr 1e30" 1 "the run diverged at step 2: the training loss is nan"
         "nothing was saved to --checkpoint 'run.ckpt'")
  expect_unchanged("--lr 1e30" run.ckpt ${ckpt_hash})
  # Read every 2 steps: the message names the window.
  train(--steps 6 --lr 1e30 --log-every 2 --data data.txt)
  expect("--lr 1e30 --log-every 2" 1 "the run diverged between steps 1 and 2 \\(the loss is read every --log-every 2 steps\\)")

elseif(CASE STREQUAL "messages")
  execute_process(COMMAND ${PROGRAM} --layers 18446744073709551615 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  expect("--layers 2^64 - 1" 2 "the model is too large: --layers 18446744073709551615")
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

else()
  message(FATAL_ERROR "train_program_test.cmake: unknown CASE '${CASE}'")
endif()
file(REMOVE_RECURSE ${WORK})
