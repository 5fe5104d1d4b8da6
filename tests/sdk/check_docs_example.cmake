# docs/sdk.md shows examples/sdk/example.c verbatim; this fails when the two drift apart.
# cmake -DDOC=docs/sdk.md -DEXAMPLE=examples/sdk/example.c -P check_docs_example.cmake
file(READ ${DOC} doc)
file(READ ${EXAMPLE} example)
string(FIND "${doc}" "```c\n${example}```\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${DOC} does not show ${EXAMPLE} verbatim in a ```c block")
endif()
