import CumulusCore
import CumulusModel
import Foundation

/// The web page of a share-a-copy link, for people without the app: readable on a phone, self-contained (inline CSS
/// and SVG; no scripts, fonts or map tiles), and everything from the payload escaped.
enum LinkPage {
    /// Escapes text for HTML content and attribute values.
    static func escape(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&#39;"
            default: result.append(character)
            }
        }
        return result
    }

    static func document(title: String, head: String = "", body: String) -> String {
        """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>\(escape(title))</title>
        \(head)
        <style>
        body { font-family: -apple-system, system-ui, "Segoe UI", Roboto, sans-serif; margin: 0; background: #f4f5f7; color: #1c1c1e; }
        main { max-width: 480px; margin: 0 auto; padding: 20px 16px 32px; }
        h1 { font-size: 1.5rem; margin: 0 0 4px; }
        .date { color: #6b6b70; margin: 0 0 16px; }
        .route { background: #fff; border-radius: 14px; padding: 12px; box-shadow: 0 1px 3px rgba(0,0,0,.08); }
        .route svg { width: 100%; height: auto; display: block; }
        dl { display: grid; grid-template-columns: 1fr 1fr; gap: 10px; margin: 16px 0 0; }
        dl div { background: #fff; border-radius: 12px; padding: 10px 12px; box-shadow: 0 1px 3px rgba(0,0,0,.08); }
        dt { color: #6b6b70; font-size: .8rem; }
        dd { margin: 2px 0 0; font-size: 1.25rem; font-weight: 600; }
        .note { color: #6b6b70; font-size: .85rem; margin-top: 20px; }
        table { width: 100%; border-collapse: collapse; background: #fff; border-radius: 12px; }
        td, th { text-align: left; padding: 8px; border-bottom: 1px solid #eee; font-size: .9rem; }
        </style>
        </head>
        <body><main>
        \(body)
        </main></body>
        </html>
        """
    }

    /// The tags a universal link needs to open the app, and a preview for messaging apps.
    static func linkTags(url: String, title: String, description: String, appStoreID: String?) -> String {
        var tags = """
            <link rel="canonical" href="\(escape(url))">
            <meta property="og:title" content="\(escape(title))">
            <meta property="og:description" content="\(escape(description))">
            <meta property="og:url" content="\(escape(url))">
            <meta property="og:type" content="website">
            """
        if let appStoreID {
            tags += "\n<meta name=\"apple-itunes-app\" content=\"app-id=\(escape(appStoreID)), app-argument=\(escape(url))\">"
        }
        return tags
    }

    static func drive(_ drive: SharedDrive, url: String, appStoreID: String?) -> String {
        let name = drive.customName ?? "Shared Drive"
        let date = formatDate(drive.startTime)
        let distance = String(format: "%.2f km", drive.distance / 1000)
        let duration = formatDuration(drive.duration)
        let average = String(format: "%.1f km/h", drive.averageSpeed * 3.6)
        let maximum = String(format: "%.1f km/h", drive.maxSpeed * 3.6)
        let description = "\(distance) in \(duration), \(date)"
        let body = """
            <h1>\(escape(name))</h1>
            <p class="date">\(escape(date))</p>
            <div class="route">\(routeSVG(drive.points))</div>
            <dl>
            <div><dt>Distance</dt><dd id="distance">\(distance)</dd></div>
            <div><dt>Duration</dt><dd id="duration">\(duration)</dd></div>
            <div><dt>Average speed</dt><dd id="average-speed">\(average)</dd></div>
            <div><dt>Maximum speed</dt><dd id="max-speed">\(maximum)</dd></div>
            </dl>
            <p class="note">Shared with Cumulus. This link works for 24 hours. Open it on a phone with the app to keep your own copy.</p>
            """
        return document(title: name, head: linkTags(url: url, title: name, description: description, appStoreID: appStoreID), body: body)
    }

    static func records(_ records: [JSONValue], url: String, appStoreID: String?) -> String {
        var rows = ""
        for record in records.prefix(200) {
            let type = record["recordType"]?.stringValue ?? ""
            let name = record["recordName"]?.stringValue ?? ""
            let fields = record["fields"]?.objectValue?.count ?? 0
            rows += "<tr><td>\(escape(type))</td><td>\(escape(name))</td><td>\(fields)</td></tr>\n"
        }
        let body = """
            <h1>Shared records</h1>
            <p class="date">\(records.count) record\(records.count == 1 ? "" : "s")</p>
            <table><tr><th>Type</th><th>Name</th><th>Fields</th></tr>
            \(rows)</table>
            <p class="note">Shared with Cumulus. This link works for 24 hours. Open it with the app to import a copy.</p>
            """
        return document(
            title: "Shared records",
            head: linkTags(url: url, title: "Shared records", description: "\(records.count) records", appStoreID: appStoreID),
            body: body
        )
    }

    static func expired() -> String {
        document(
            title: "This link has expired",
            body: """
                <h1>This link has expired</h1>
                <p class="date">Shared links work for 24 hours. Ask for a new one.</p>
                """
        )
    }

    /// The route as an SVG path scaled to its points (equirectangular, corrected for latitude).
    static func routeSVG(_ points: [DrivePoint]) -> String {
        let width = 320.0
        let height = 220.0
        let padding = 12.0
        guard !points.isEmpty else {
            return "<svg viewBox=\"0 0 \(Int(width)) \(Int(height))\" role=\"img\" aria-label=\"No route\"></svg>"
        }
        let meanLatitude = points.map(\.lat).reduce(0, +) / Double(points.count)
        let scaleX = cos(meanLatitude * .pi / 180)
        let xs = points.map { $0.lon * scaleX }
        let ys = points.map(\.lat)
        let (minX, maxX, minY, maxY) = (xs.min()!, xs.max()!, ys.min()!, ys.max()!)
        let span = max(maxX - minX, maxY - minY, 1e-9)
        let scale = min((width - 2 * padding) / max(maxX - minX, span * 1e-3), (height - 2 * padding) / max(maxY - minY, span * 1e-3))
        let offsetX = (width - (maxX - minX) * scale) / 2
        let offsetY = (height - (maxY - minY) * scale) / 2
        var path = ""
        path.reserveCapacity(points.count * 14)
        for index in points.indices {
            let x = offsetX + (xs[index] - minX) * scale
            let y = height - (offsetY + (ys[index] - minY) * scale)
            path += (index == 0 ? "M" : " L") + String(format: "%.1f,%.1f", x, y)
        }
        let start = path.split(separator: " ").first.map { String($0.dropFirst()) } ?? "0,0"
        let startParts = start.split(separator: ",")
        return """
            <svg viewBox="0 0 \(Int(width)) \(Int(height))" role="img" aria-label="Route">
            <path id="route" d="\(path)" fill="none" stroke="#0a84ff" stroke-width="4" stroke-linecap="round" stroke-linejoin="round"/>
            <circle cx="\(startParts.first ?? "0")" cy="\(startParts.last ?? "0")" r="6" fill="#34c759"/>
            </svg>
            """
    }

    static func formatDuration(_ seconds: Double) -> String {
        let total = Int(seconds.rounded())
        let hours = total / 3600
        let minutes = total % 3600 / 60
        let secs = total % 60
        return hours > 0 ? String(format: "%d:%02d:%02d", hours, minutes, secs) : String(format: "%d:%02d", minutes, secs)
    }

    static func formatDate(_ milliseconds: Int64) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "d MMM yyyy, HH:mm 'UTC'"
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }
}
