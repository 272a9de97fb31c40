# cmake -DFILES="a;b;..." [-DSTAMP=file] -P check_host_api.cmake
# The host library's own applications (sens perf: src/perf, and the fio engine: src/fio) use
# its public header, include/sens/host.h, and nothing of its internals: what they need is
# public API (docs/host-abi.md). Fails, naming the file, the line and the header, when one of
# FILES includes a header of the library (src/host) or of its transport (src/transport).
if(NOT FILES)
  message(FATAL_ERROR "check_host_api: FILES is empty")
endif()
set(bad "")
foreach(f ${FILES})
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "check_host_api: ${f}: no such file")
  endif()
  file(STRINGS "${f}" lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]+)[\">]")
      set(inc "${CMAKE_MATCH_1}")
      if(inc MATCHES "^(host|transport)/")
        get_filename_component(name "${f}" NAME)
        string(APPEND bad "  ${name}:${n}: includes ${inc}\n")
      endif()
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "check_host_api: sens perf and the fio engine must use include/sens/host.h "
                      "only, not the host library's internals; make what they need public API "
                      "(docs/host-abi.md):\n${bad}")
endif()
if(STAMP)
  file(TOUCH "${STAMP}")
endif()
