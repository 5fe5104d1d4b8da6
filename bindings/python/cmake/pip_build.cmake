# Included before project() when pip builds the package (pyproject.toml's CMAKE_PROJECT_INCLUDE_BEFORE): compile
# through ccache when it is installed and no launcher was chosen.
find_program(CELLM_CCACHE ccache)
if(CELLM_CCACHE)
  foreach(lang C CXX)
    if(NOT CMAKE_${lang}_COMPILER_LAUNCHER AND NOT DEFINED ENV{CMAKE_${lang}_COMPILER_LAUNCHER})
      set(CMAKE_${lang}_COMPILER_LAUNCHER ${CELLM_CCACHE})
    endif()
  endforeach()
endif()
