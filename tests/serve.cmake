# `stof serve` over loopback on the CPU (tests/serve/test_serve.py): its embeddings against
# `stof embed`, every bad input with its status and JSON error, a full queue, 32 concurrent
# clients and a SIGTERM that drains. Registered when the tool has the server (libmicrohttpd
# found); the pytest wrapper of tests/python.cmake reports a missing pytest as skipped.
if(TARGET stof_cli AND MHD_FOUND)
  add_test(NAME test_serve
           COMMAND python3 ${CMAKE_CURRENT_BINARY_DIR}/run_pytest.py -q -p no:cacheprovider
                   ${CMAKE_CURRENT_SOURCE_DIR}/serve)
  set_tests_properties(test_serve PROPERTIES LABELS cpu SKIP_RETURN_CODE 77 TIMEOUT 900
                       ENVIRONMENT "STOF_CLI=$<TARGET_FILE:stof_cli>;STOF_LIBRARY=$<TARGET_FILE:stof>;PYTHONDONTWRITEBYTECODE=1")
endif()
