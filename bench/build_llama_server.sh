#!/usr/bin/env bash
# Builds llama.cpp's own HTTP server, llama-server, for bench/serve_load --llama-server, with
# bench/build_llamacpp_tool.sh (llama-cpp-python 0.3.36's llama.cpp, native CPU kernels). Prints the binary's path.
exec "$(dirname "$0")/build_llamacpp_tool.sh" llama-server
