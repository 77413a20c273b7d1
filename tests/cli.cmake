# The stof command (tools/) run as a user runs it: each subcommand's --help, its
# option errors (exit 2 and the exact message) and small runs on the CPU backend,
# checked by tests/cli/test_cli.sh, one test per subcommand. None needs a GPU
# (stof tune is only asked for its help and option errors).
if(TARGET stof_cli)
  foreach(group general run tune demo mask embed score)
    add_test(NAME test_cli_${group}
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli.sh $<TARGET_FILE:stof_cli>
                     ${CMAKE_SOURCE_DIR} ${group})
    set_tests_properties(test_cli_${group} PROPERTIES LABELS cpu TIMEOUT 300)
  endforeach()
endif()
