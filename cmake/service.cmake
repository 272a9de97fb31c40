# Running `sens target` as a service (README, "Running it as a service"): systemd's readiness
# notifications in `sens`, and what `cmake --install` / `make install` put under the prefix:
# bin/sens, the host library (lib/libsens_host.so.0 with its header and sens-host.pc), the
# systemd unit sens-target.service and an example config. Nothing goes to /etc.
include(GNUInstallDirs)

# sd_notify (src/tools/service.cc): without libsystemd-dev `sens` builds and runs, but the
# installed unit (Type=notify) would wait for a READY=1 that never comes.
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(SYSTEMD IMPORTED_TARGET libsystemd)
endif()
if(SYSTEMD_FOUND)
  target_link_libraries(sens PRIVATE PkgConfig::SYSTEMD)
  target_compile_definitions(sens PRIVATE SENS_HAVE_SYSTEMD=1)
  message(STATUS "systemd notify: libsystemd ${SYSTEMD_VERSION}")
else()
  target_compile_definitions(sens PRIVATE SENS_HAVE_SYSTEMD=0)
  message(STATUS "systemd notify: not built (no libsystemd-dev: make deps-build); "
                 "sens-target.service (Type=notify) needs it")
endif()

set(SENS_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "where sens-target.service goes (relative: under the install prefix)")

install(TARGETS sens RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS sens_host_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/sens/host.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sens)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/target.json DESTINATION ${CMAKE_INSTALL_DOCDIR})

# sens-host.pc and the unit name absolute paths of the prefix given at install time
# (`cmake --install build --prefix DIR` may differ from the configured one), so they are
# configured then; DESTDIR stages them like every other file.
get_target_property(SENS_HOST_VERSION sens_host_shared VERSION)
install(CODE "
  set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
  set(version \"${SENS_HOST_VERSION}\")
  foreach(pair \"pc_libdir;${CMAKE_INSTALL_LIBDIR}\" \"pc_includedir;${CMAKE_INSTALL_INCLUDEDIR}\"
               \"bindir;${CMAKE_INSTALL_BINDIR}\" \"unitdir;${SENS_SYSTEMD_UNIT_DIR}\")
    list(GET pair 0 var)
    list(GET pair 1 dir)
    if(IS_ABSOLUTE \"\${dir}\")
      set(\${var} \"\${dir}\")
    elseif(var MATCHES \"^pc_\")
      set(\${var} \"\\\${prefix}/\${dir}\")
    else()
      set(\${var} \"\${prefix}/\${dir}\")
    endif()
  endforeach()
  # One directory per destination: test runs install this tree into prefixes of their own
  # at the same time.
  string(MD5 key \"\$ENV{DESTDIR}\${prefix}\")
  set(out \"${CMAKE_BINARY_DIR}/install-generated/\${key}\")
  configure_file(\"${CMAKE_SOURCE_DIR}/packaging/sens-host.pc.in\" \"\${out}/sens-host.pc\" @ONLY)
  configure_file(\"${CMAKE_SOURCE_DIR}/packaging/sens-target.service.in\"
                 \"\${out}/sens-target.service\" @ONLY)
  set(libdir \"${CMAKE_INSTALL_LIBDIR}\")
  if(NOT IS_ABSOLUTE \"\${libdir}\")
    set(libdir \"\${prefix}/\${libdir}\")
  endif()
  file(INSTALL DESTINATION \"\${libdir}/pkgconfig\" TYPE FILE FILES \"\${out}/sens-host.pc\")
  file(INSTALL DESTINATION \"\${unitdir}\" TYPE FILE FILES \"\${out}/sens-target.service\")
  file(REMOVE_RECURSE \"\${out}\")
")
