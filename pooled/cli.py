"""`pooled`: `serve` parses settings, starts loading the model and opens the listener at once;
`pull`, `list` and `rm` manage the models folder (pooled/model_commands.py).

The server's modules (the engine, FastAPI, uvicorn: seconds of imports) are imported by `serve`
alone, so the model commands answer at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from pooled import model_commands
from pooled import settings as settings_module

log = logging.getLogger("pooled")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pooled", description="A local LLM server for OpenAI and Anthropic clients.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model on 127.0.0.1:8080")
    settings_module.add_arguments(serve)
    model_commands.add_parsers(commands)
    return parser


def serve(settings: settings_module.Settings) -> int:
    import uvicorn

    from handlers.banner import banner
    from pooled.app import build_app, server_context
    from pooled.catalog import CatalogError, load_catalog
    from pooled.downloads import Downloader
    from pooled.loading import load_serving
    from pooled.model_host import ModelHost, ModelNotFound
    from pooled.model_library import FolderLibrary, model_to_serve
    from pooled.server import DrainingServer

    models_dir = Path(settings.models_dir).expanduser()
    try:
        catalog = load_catalog(Path(settings.catalog).expanduser() if settings.catalog else None)
        path, model_id = model_to_serve(settings.model, catalog, models_dir)
    except (ModelNotFound, CatalogError) as error:
        log.error("%s", error)
        return 2
    host = ModelHost(settings, path, load_serving, lambda: print(banner(context), flush=True), model_id)
    downloader = Downloader(models_dir, settings.download_retries, stall_timeout_s=settings.download_stall_timeout)
    library = FolderLibrary(host, catalog, models_dir, downloader, settings.switch_allow_implicit)
    context = server_context(settings, host, library)
    config = uvicorn.Config(build_app(settings, context), host=settings.host, port=settings.port, log_level="info")
    host.start()
    log.info("listening on http://%s:%d (model %s loading)", settings.host, settings.port, host.model_id)
    DrainingServer(config, host, context.counters, settings.drain_grace).run()
    downloader.cancel()
    host.close()
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
    settings = settings_module.load(arguments)
    if command == "serve":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return serve(settings)
    return model_commands.run(command, arguments, settings)


if __name__ == "__main__":
    sys.exit(main())
