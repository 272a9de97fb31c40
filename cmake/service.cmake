# Running `sens target` as a service (README, "Running it as a service"): systemd's readiness
# notifications in `sens`.

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
