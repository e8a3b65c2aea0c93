"""The stack's Schema Registry: Apicurio Registry with its Confluent-compatible API (``/apis/ccompat/v6``), schemas
kept in memory (a restart forgets them, as a fresh stack should). Its jar is built once from Maven Central
(``dev/registry/pom.xml`` says how) and started like Kafka, in its own process."""

from __future__ import annotations

import shutil
import subprocess
import time

from kafka_server import java_cmd
from stack_common import REPO, STACK, Ports, StackError, http_ok, log, reused, spawn, wait_until

REGISTRY_DIR = REPO / "dev" / "registry"
JAR = REGISTRY_DIR / "target" / "registry-runner.jar"
# The path of the Confluent-compatible API under the registry's address.
CCOMPAT = "/apis/ccompat/v6"


def registry_jar() -> str:
    """The registry's runnable jar, built with Maven the first time (about a minute once ~/.m2 holds its parts)."""
    if not JAR.exists():
        if shutil.which("mvn") is None:
            raise StackError("Maven is needed once to build the Schema Registry (Maven Central): apt-get install maven")
        log("registry: building Apicurio Registry from Maven Central (once; cached in ~/.m2 and dev/registry/target)")
        result = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(REGISTRY_DIR / "pom.xml"), "package"], capture_output=True, text=True
        )
        if result.returncode != 0 or not JAR.exists():
            output = result.stdout[-3000:] + result.stderr[-3000:]
            raise StackError(f"mvn could not build the Schema Registry:\n{output}")
    return str(JAR)


def registry_url(port: int) -> str:
    """What a client of the Confluent API is given: the registry's address with the API's path."""
    return f"http://127.0.0.1:{port}{CCOMPAT}"


def registry_ready(port: int) -> bool:
    return http_ok(f"{registry_url(port)}/subjects")


def start_registry(ports: Ports) -> None:
    if reused("registry", lambda: registry_ready(ports.registry), registry_url(ports.registry)):
        return
    java, jar = java_cmd(), registry_jar()
    started = time.monotonic()
    command = [
        java,
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dquarkus.http.port={ports.registry}",
        "-Dquarkus.http.host=127.0.0.1",
        f"-Djava.io.tmpdir={STACK / 'registry'}",
        # Vert.x would unpack classpath files into a cache folder it makes readable to every user; nothing here needs
        # it (the registry's web UI is not used).
        "-Dquarkus.vertx.caching=false",
        "-Dquarkus.vertx.classpath-resolving=false",
        "-jar",
        jar,
    ]
    (STACK / "registry").mkdir(exist_ok=True)
    pid = spawn("registry", command)
    wait_until("registry", pid, lambda: registry_ready(ports.registry), timeout=90)
    log(f"registry: started (pid {pid}) on {registry_url(ports.registry)} in {time.monotonic() - started:.1f}s")
