"""`pooled`: `serve` parses settings, starts loading the model and opens the listener at once;
`pull`, `list` and `rm` manage the models folder (pooled/commands/model_commands.py).

The server's modules (the engine, FastAPI, uvicorn: seconds of imports) are imported by `serve`
alone, so the model commands answer at once.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from pooled.commands import model_commands
from pooled.configuration import setting_sources
from pooled.configuration.console_log import configure_console_log
from pooled.configuration.setting_types import SettingsError

log = logging.getLogger("pooled")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pooled", description="A local LLM server for OpenAI and Anthropic clients.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model on 127.0.0.1:8080")
    setting_sources.add_arguments(serve)
    model_commands.add_parsers(commands)
    return parser


def serve(loaded: setting_sources.LoadedSettings) -> int:
    from pooled.hosting.malloc_arenas import limit_malloc_arenas

    limit_malloc_arenas()  # before any thread allocates (jax's and uvicorn's imports start some)
    import uvicorn

    from engine.front import is_leader
    from handlers.banner import banner
    from pooled.configuration.config_service import host_reloader
    from pooled.configuration.live_settings import LiveSettings
    from pooled.hosting.group_serving import follow_leader, group_spec, join_group, lead, stop_group
    from pooled.hosting.loading import load_serving
    from pooled.hosting.model_host import ModelHost, ModelNotFound
    from pooled.hosting.model_paths import model_path_problems
    from pooled.models_folder.catalog import CatalogError, load_catalog
    from pooled.models_folder.downloads import Downloader
    from pooled.models_folder.folder_library import FolderLibrary, model_to_serve, serving_defaults
    from pooled.web.app import build_app, server_context
    from pooled.web.server import DrainingServer

    settings = loaded.settings
    group = None
    if (spec := group_spec(settings)) is not None:
        group = join_group(spec)  # before anything touches a JAX backend
        if not is_leader():
            return follow_leader(group)
    models_dir = Path(settings.models_dir).expanduser()
    try:
        catalog = load_catalog(Path(settings.catalog).expanduser() if settings.catalog else None)
        path, model_id = model_to_serve(settings.model, catalog, models_dir)
    except (ModelNotFound, CatalogError) as error:
        log.error("%s", error)
        return 2
    if problems := model_path_problems(path, settings):
        for problem in problems:
            log.error("%s", problem)
        return 2
    loaded = setting_sources.with_model_defaults(loaded, serving_defaults(catalog, model_id))
    settings = loaded.settings

    def ready() -> None:
        # A switch brings the new model's own: its catalog entry's and its checkpoint's.
        live.serve_model(serving_defaults(catalog, host.model_id), host.checkpoint_defaults)
        print(banner(context), flush=True)

    loader = load_serving if group is None else functools.partial(load_serving, group=lead(group, settings))
    host = ModelHost(settings, path, loader, ready, model_id)
    downloader = Downloader(models_dir, settings.download_retries, stall_timeout_s=settings.download_stall_timeout)
    library = FolderLibrary(host, catalog, models_dir, downloader, settings.switch_allow_implicit)
    live = LiveSettings(loaded)  # PATCH /v1/config changes it; these parts and the context's follow
    live.subscribe(host.update_live)
    live.subscribe(lambda changed: library.set_implicit_switch(changed.switch_allow_implicit))
    context = server_context(settings, host, library, live, host_reloader(host))
    app = build_app(settings, context)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level)
    host.start()
    log.info("listening on http://%s:%d (model %s loading)", settings.host, settings.port, host.model_id)
    beside = None
    if settings.metrics_bind is not None:
        from pooled.web.metrics_listener import metrics_server

        beside = metrics_server(settings.metrics_bind, context, settings.api_key)
        log.info("metrics on http://%s/metrics/prometheus", settings.metrics_bind)
    DrainingServer(config, host, context.counters, settings.drain_grace, beside).run()
    downloader.cancel()
    host.close()
    if group is not None:
        stop_group(group)
    if host.state == "dead":
        # It kept answering (503, /health with the cause) until told to stop; a supervisor must
        # still see that it did not serve.
        cause, reason = host.failure or ("fault", "unknown")
        log.error("exiting with status 1: the model was not running (%s: %s)", cause, reason)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    arguments = vars(_parser().parse_args(argv))
    command = arguments.pop("command")
    try:
        loaded = setting_sources.load_with_origins(arguments)
    except SettingsError as error:
        print(f"pooled: {error}", file=sys.stderr)
        return 2
    if command == "serve":
        configure_console_log(loaded.settings.log_level)
        return serve(loaded)
    return model_commands.run(command, arguments, loaded.settings)


if __name__ == "__main__":
    sys.exit(main())
