# Python binding tests: pytest over tests/python against the freshly built
# libstof.so. A small generated wrapper reports a missing pytest as skipped
# (exit 77) instead of failing; tests that need torch or a GPU skip themselves.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/run_pytest.py
"import importlib.util, sys
if importlib.util.find_spec('pytest') is None:
    print('pytest is not installed: test_python skipped')
    sys.exit(77)
import pytest
sys.exit(pytest.main(sys.argv[1:]))
")
add_test(NAME test_python
         COMMAND python3 ${CMAKE_CURRENT_BINARY_DIR}/run_pytest.py -q -p no:cacheprovider
                 ${CMAKE_SOURCE_DIR}/tests/python)
set(stof_python_env "STOF_LIBRARY=$<TARGET_FILE:stof>" "PYTHONPATH=${CMAKE_SOURCE_DIR}/python"
    "PYTHONDONTWRITEBYTECODE=1")
set_tests_properties(test_python PROPERTIES LABELS cpu SKIP_RETURN_CODE 77 TIMEOUT 600
                                            ENVIRONMENT "${stof_python_env}")

# The CUDA cases of the transformers integration and torch.compile tests (ids with "cuda"):
# stof against SDPA per model family on the GPU, CUDA graphs. Skipped (77) where torch sees no
# CUDA device.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/run_pytest_cuda.py
"import importlib.util, sys
if importlib.util.find_spec('pytest') is None or importlib.util.find_spec('torch') is None:
    print('pytest or torch is not installed: skipped')
    sys.exit(77)
import torch
if not torch.cuda.is_available():
    print('torch sees no CUDA device: skipped')
    sys.exit(77)
import pytest
sys.exit(pytest.main(sys.argv[1:]))
")
add_test(NAME test_python_gpu_hf
         COMMAND python3 ${CMAKE_CURRENT_BINARY_DIR}/run_pytest_cuda.py -q -p no:cacheprovider
                 -k cuda ${CMAKE_SOURCE_DIR}/tests/python/test_hf_integration.py
                 ${CMAKE_SOURCE_DIR}/tests/python/test_compile.py)
set_tests_properties(test_python_gpu_hf PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900
                                                   ENVIRONMENT "${stof_python_env}")
