# ctest "bench: json schema (cpu)": runs ember_bench on the CPU with tiny settings (every mode,
# both workloads, first-step probes included) and checks the JSON it writes with
# check_bench_json.py. Arguments: -DBENCH= -DPYTHON= -DCHECKER= -DOUT=
# With -DLAUNCHER=<ember-run> ("bench: data-parallel json (cpu, 2 Gloo ranks)"): the same under
# two ranks with --ddp, three modes, and every row must report the ranks' parameters identical.
foreach(v BENCH PYTHON CHECKER OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_bench_test.cmake: -D${v}= is required")
  endif()
endforeach()

file(REMOVE ${OUT})  # a stale file from an earlier run must not pass for this one
if(DEFINED LAUNCHER)
  set(modes eager,default,reduce-overhead)
  set(expected_rows 6)
  execute_process(
    COMMAND ${LAUNCHER} --nproc-per-node 2 --master-port 0
            ${BENCH} run --ddp --device cpu --threads 1 --workloads mlp,deep_mlp --batches 8
            --modes ${modes} --warmup 1 --steps 2 --repeats 2 --loss-steps 3 --json ${OUT}
    RESULT_VARIABLE bench_rc)
else()
  set(expected_rows 10)
  execute_process(
    COMMAND ${BENCH} run --device cpu --workloads mlp,deep_mlp --batches 8
            --modes eager,default,reduce-overhead,max-autotune,dynamic
            --warmup 1 --steps 2 --repeats 2 --loss-steps 3 --json ${OUT}
    RESULT_VARIABLE bench_rc)
endif()
if(NOT bench_rc EQUAL 0)
  message(FATAL_ERROR "ember_bench failed (${bench_rc})")
endif()
if(NOT EXISTS ${OUT})
  message(FATAL_ERROR "ember_bench wrote no ${OUT}")
endif()

execute_process(COMMAND ${PYTHON} ${CHECKER} ${OUT} RESULT_VARIABLE check_rc)
if(check_rc EQUAL 2)
  # The checker cannot run (no python3-jsonschema): the test's SKIP_REGULAR_EXPRESSION.
  message("EMBER_SKIP: check_bench_json.py cannot run here (python3-jsonschema missing?)")
  return()
endif()
if(NOT check_rc EQUAL 0)
  message(FATAL_ERROR "check_bench_json.py rejected ${OUT} (${check_rc})")
endif()

# Every row must be ok: an error row would still satisfy the schema.
file(READ ${OUT} doc)
string(JSON n LENGTH "${doc}" results)
math(EXPR last "${n} - 1")
if(NOT n EQUAL expected_rows)
  message(FATAL_ERROR "expected ${expected_rows} result rows (2 workloads x the modes), got ${n}")
endif()
foreach(i RANGE ${last})
  string(JSON status GET "${doc}" results ${i} status)
  if(NOT status STREQUAL "ok")
    string(JSON row GET "${doc}" results ${i})
    message(FATAL_ERROR "result ${i} is not ok: ${row}")
  endif()
  if(DEFINED LAUNCHER)
    string(JSON same GET "${doc}" results ${i} ranks_identical)
    if(NOT same)
      string(JSON row GET "${doc}" results ${i})
      message(FATAL_ERROR "result ${i}: the ranks' parameters differ: ${row}")
    endif()
  endif()
endforeach()
if(DEFINED LAUNCHER)
  string(JSON world GET "${doc}" config world_size)
  if(NOT world EQUAL 2)
    message(FATAL_ERROR "config.world_size is ${world}, expected 2")
  endif()
endif()
