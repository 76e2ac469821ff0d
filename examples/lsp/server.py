"""A small language server built with pygls (a third-party LSP implementation).

It answers hover with the word under the cursor and publishes one diagnostic per
line that contains "TODO". The contract tests speak to it over stdio, through
contract's header-delimited codec, to show the LSP contract describes a real
server's frames.
"""

from lsprotocol import types
from pygls.lsp.server import LanguageServer

server = LanguageServer("contract-lsp-example", "0.1.0")


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: LanguageServer, params: types.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    diagnostics = [
        types.Diagnostic(
            range=types.Range(
                start=types.Position(line=n, character=line.index("TODO")),
                end=types.Position(line=n, character=line.index("TODO") + 4),
            ),
            message="TODO left in the text",
            severity=types.DiagnosticSeverity.Warning,
            source="contract-lsp-example",
        )
        for n, line in enumerate(doc.text.splitlines())
        if "TODO" in line
    ]
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=doc.uri, version=doc.version, diagnostics=diagnostics)
    )


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: LanguageServer, params: types.HoverParams) -> types.Hover | None:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    word = doc.word_at_position(params.position)
    if not word:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=f"**{word}**"))


if __name__ == "__main__":
    server.start_io()
