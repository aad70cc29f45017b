/// The console's charts: a bar a minute over the last hour, drawn by the server as inline SVG (the console runs no
/// script, and its policy forbids any), each with its numbers in words beside it for those who read rather than look.
enum ConsoleCharts {
    /// One series drawn, or two stacked (`lower` under `upper`, as devices in step under devices behind).
    struct Chart {
        var id: String
        var title: String
        /// Per minute, oldest first.
        var lower: [Int]
        var upper: [Int] = []
        var lowerLabel = ""
        var upperLabel = ""
        /// A gauge (connections open) is read as "now", a count (requests) as a rate and a total.
        var isGauge = false
    }

    static let width = 240
    static let height = 56

    static func html(_ chart: Chart) -> String {
        let totals = chart.lower.indices.map { chart.lower[$0] + (chart.upper.indices.contains($0) ? chart.upper[$0] : 0) }
        let peak = totals.max() ?? 0
        let barWidth = Double(width) / Double(max(totals.count, 1))
        var bars = ""
        for (index, lower) in chart.lower.enumerated() where peak > 0 {
            let upper = chart.upper.indices.contains(index) ? chart.upper[index] : 0
            let x = Double(index) * barWidth
            let lowerHeight = Double(lower) / Double(peak) * Double(height - 4)
            let upperHeight = Double(upper) / Double(peak) * Double(height - 4)
            if lower > 0 {
                bars += rect(x: x, y: Double(height) - lowerHeight, width: barWidth - 1, height: lowerHeight, class: "lower")
            }
            if upper > 0 {
                bars += rect(x: x, y: Double(height) - lowerHeight - upperHeight, width: barWidth - 1, height: upperHeight, class: "upper")
            }
        }
        let now = totals.last ?? 0
        let words: String
        if chart.isGauge {
            words = "now \(now), at most \(peak) in a minute of the hour"
        } else if chart.upper.isEmpty {
            words = "\(totals.reduce(0, +)) in the hour, at most \(peak) a minute, \(now) this minute"
        } else {
            words =
                "\(chart.upper.reduce(0, +)) \(chart.upperLabel) and \(chart.lower.reduce(0, +)) \(chart.lowerLabel) in the hour"
        }
        let legend =
            chart.upper.isEmpty
            ? ""
            : #"<span class="legend"><i class="upper"></i>\#(ConsolePage.escape(chart.upperLabel)) <i class="lower"></i>\#(ConsolePage.escape(chart.lowerLabel))</span>"#
        return """
            <figure class="chart" id="chart-\(chart.id)">
            <figcaption><b>\(ConsolePage.escape(chart.title))</b> <span class="words">\(words)</span>\(legend)</figcaption>
            <svg viewBox="0 0 \(width) \(height)" preserveAspectRatio="none" role="img" aria-label="\(ConsolePage.escape(chart.title)), a bar a minute over the last hour: \(words)">\
            <line x1="0" y1="\(height - 1)" x2="\(width)" y2="\(height - 1)" class="axis"/>\(bars)</svg>
            <div class="ticks"><span>an hour ago</span><span>now</span></div>
            </figure>
            """
    }

    private static func rect(x: Double, y: Double, width: Double, height: Double, class name: String) -> String {
        #"<rect x="\#(format(x))" y="\#(format(y))" width="\#(format(max(width, 0.5)))" height="\#(format(max(height, 1)))" class="\#(name)"/>"#
    }

    private static func format(_ value: Double) -> String {
        let rounded = (value * 10).rounded() / 10
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
    }

    static let style = """
        .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 10px; }
        .chart { background: #fff; border-radius: 10px; padding: 10px 12px; margin: 0; box-shadow: 0 1px 3px rgba(0,0,0,.08); }
        .chart figcaption { font-size: .9rem; margin-bottom: 6px; }
        .chart figcaption .words { display: block; color: #6b6b70; font-size: .82rem; }
        .chart svg { width: 100%; height: 56px; display: block; }
        .chart rect.lower { fill: #5b9bff; } .chart rect.upper { fill: #ff9f0a; }
        .chart line.axis { stroke: #ddd; stroke-width: 1; }
        .chart .ticks { display: flex; justify-content: space-between; color: #8e8e93; font-size: .72rem; }
        .chart .legend { display: block; font-size: .75rem; color: #6b6b70; }
        .chart .legend i { display: inline-block; width: 9px; height: 9px; border-radius: 2px; margin: 0 3px 0 6px; }
        .chart .legend i.upper { background: #ff9f0a; } .chart .legend i.lower { background: #5b9bff; }
        """
}
