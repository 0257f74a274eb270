// The parc language client: starts `parc lsp` over stdio for .par files.
// vscode-languageclient: https://github.com/microsoft/vscode-languageserver-node (client/README.md)
"use strict";
const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const [command, ...args] = vscode.workspace.getConfiguration("parc").get("command", ["parc", "lsp"]);
  const server = { command, args, transport: TransportKind.stdio };
  client = new LanguageClient("parc", "parc", { run: server, debug: server }, {
    documentSelector: [{ scheme: "file", language: "par" }],
    synchronize: { fileEvents: vscode.workspace.createFileSystemWatcher("**/*.par") },
  });
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
